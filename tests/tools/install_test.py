"""meson install into a temporary DESTDIR, then use what was installed:

  install_test.py MESON BUILD_DIR PREFIX LIBDIR VERSION

The installed `lowtide` finds the installed library (relative to itself,
since under a DESTDIR the configured prefix holds nothing of this build),
runs a command with it preloaded, and the installed Python helper and
pkg-config file work from there."""
import json
import os
import subprocess
import sys
import tempfile

from tools_common import check, clean_env, finish, run

meson, build, prefix, libdir, version = sys.argv[1:6]
libdir = libdir if os.path.isabs(libdir) else os.path.join(prefix, libdir)

with tempfile.TemporaryDirectory(prefix="lowtide-install-") as dest:
    rc, out, err = run([meson, "install", "-C", build, "--no-rebuild", "--quiet", "--destdir", dest], clean_env(),
                       timeout=300)
    check(rc == 0, "meson install rc %d: %s" % (rc, err[-2000:]))
    root = dest + prefix
    lowtide = os.path.join(root, "bin", "lowtide")
    lib = os.path.join(dest + libdir, "liblowtide.so")
    check(os.access(lowtide, os.X_OK), "bin/lowtide installed, executable")
    check(os.path.isfile(os.path.join(root, "include", "lowtide", "lowtide.h")), "header installed")
    check(os.path.isfile(os.path.join(root, "include", "lowtide", "lowtide_stats.def")),
          "lowtide_stats.def installed next to it (the header includes it)")
    check(os.path.isfile(lib), "library installed in libdir")

    # The installed launcher with nothing of the source tree around it.
    env = clean_env()
    env.pop("PYTHONPATH", None)
    rc, out, err = run([lowtide, "lib"], env, cwd=dest)
    check(rc == 0 and out.strip() == os.path.realpath(lib), "lowtide lib -> %r (%s)" % (out, err))

    pyfiles = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f == "lowtide.py"]
    check(len(pyfiles) == 1, "one lowtide.py installed: %s" % pyfiles)
    pydir = os.path.dirname(pyfiles[0]) if pyfiles else ""
    # Where the system's python3 reads modules of this prefix: for
    # /usr/local on Debian /usr/local/lib/python3.X/dist-packages, not the
    # /usr/local/lib/python3/dist-packages meson 1.0 chooses by itself.
    if prefix in ("/usr", "/usr/local"):
        syspath = run(["/usr/bin/python3", "-I", "-c", "import sys; print('\\n'.join(sys.path))"], env)[1].split()
        check(pydir[len(dest):] in syspath, "lowtide.py installed in %s, on /usr/bin/python3's sys.path %s"
              % (pydir[len(dest):], syspath))
    rc, out, err = run([lowtide, "--version"], env, cwd=dest)
    check(rc == 0 and out == "lowtide %s\n" % version, "installed lowtide --version: %r %r" % (out, err))
    check(os.path.isfile(os.path.join(pydir, "lowtide_cli", "main.py")), "lowtide_cli next to lowtide.py")
    probe = ("import json, os, lowtide\n"
             "print(json.dumps({'active': lowtide.active(), 'version': lowtide.version(),"
             " 'maps': [l.split()[-1] for l in open('/proc/self/maps') if 'liblowtide' in l][:1],"
             " 'helper': lowtide.__file__}))")
    rc, out, err = run([lowtide, "run", "--stats", "json", "--stats-file", os.path.join(dest, "r.json"), "--",
                        "/usr/bin/python3", "-c", probe], dict(env, PYTHONPATH=pydir), cwd=dest)
    check(rc == 0, "installed lowtide run: rc %d %s" % (rc, err))
    if rc == 0:
        got = json.loads(out)
        check(got["active"] and got["maps"] == [os.path.realpath(lib)],
              "the installed library is the one preloaded: %r" % got)
        check(got["helper"] == os.path.join(pydir, "lowtide.py"), "installed helper imported: %r" % got)
    with open(os.path.join(dest, "r.json")) as f:
        check(json.load(f)["schema"] == "lowtide-report", "report written")

    # The installed helper's ctypes struct is the installed header's, field
    # by field (tests/stats/stats_layout.c prints the header's layout).
    layout_src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "stats", "stats_layout.c")
    layout_exe = os.path.join(dest, "stats_layout")
    rc, out, err = run(["cc", "-o", layout_exe, layout_src, "-I" + os.path.join(root, "include")], env)
    check(rc == 0, "stats_layout.c compiles against the installed header: %s" % err)
    if rc == 0:
        c_layout = run([layout_exe], env)[1]
        rc, py_layout, err = run([lowtide, "run", "--", "/usr/bin/python3", "-c",
                                  "import ctypes, lowtide\n"
                                  "S = lowtide._Stats\n"
                                  "print('sizeof %d' % ctypes.sizeof(S))\n"
                                  "for n, _ in S._fields_[1:]: print(n, getattr(S, n).offset, getattr(S, n).size)"],
                                 dict(env, PYTHONPATH=pydir), cwd=dest)
        check(rc == 0 and py_layout == c_layout and c_layout.count("\n") >= 29,
              "installed helper's struct = installed header's:\n%s\n%s%s" % (py_layout, c_layout, err))

    # pkg-config: the paths are the configured prefix's (where a real install
    # puts them); under the DESTDIR they hold the installed files.
    pcdir = os.path.join(dest + libdir, "pkgconfig")
    pc_env = dict(env, PKG_CONFIG_PATH=pcdir)
    rc, out, err = run(["pkg-config", "--cflags", "--libs", "lowtide"], pc_env)
    check(rc == 0 and out.split() == ["-I" + os.path.join(prefix, "include"), "-L" + libdir, "-llowtide"],
          "pkg-config --cflags --libs: %r %r" % (out, err))
    rc, out, err = run(["pkg-config", "--variable=preload", "lowtide"], pc_env)
    check(out.strip() == os.path.join(libdir, "liblowtide.so"), "pkg-config preload variable: %r" % out)
    rc, out, err = run(["pkg-config", "--modversion", "lowtide"], pc_env)
    check(rc == 0 and out.strip().count(".") == 2, "pkg-config --modversion: %r" % out)

    # The installed header compiles, and a program linked with -llowtide
    # gets lowtide as its malloc (flags from pkg-config, DESTDIR put in front).
    src = os.path.join(dest, "use.c")
    with open(src, "w") as f:
        f.write('#include <lowtide/lowtide.h>\n#include <stdio.h>\n#include <stdlib.h>\n'
                'int main(void) {\n  struct lowtide_stats s = {.size = sizeof s};\n'
                '  void* p = malloc(8 << 20); free(p);\n'
                '  if (lowtide_get_stats(&s) != 0) return 1;\n'
                '  printf("%s %llu\\n", lowtide_version(), (unsigned long long)s.large_maps);\n  return 0;\n}\n')
    flags = run(["pkg-config", "--cflags", "--libs", "lowtide"], pc_env)[1].split()
    flags = [f[:2] + dest + f[2:] if f[:2] in ("-I", "-L") else f for f in flags]
    exe = os.path.join(dest, "use")
    rc, out, err = run(["cc", "-o", exe, src] + flags, env)
    check(rc == 0, "cc with pkg-config flags: %s" % err)
    if rc == 0:
        rc, out, err = run([exe], dict(env, LD_LIBRARY_PATH=dest + libdir))
        check(rc == 0 and out.split()[1:] == ["1"], "linked program: lowtide served its 8 MiB block: %r" % out)
    # docs/usage.md's line for a prefix ld.so does not search: the library's
    # directory recorded as the program's rpath (pkg-config's libdir,
    # DESTDIR put in front), no LD_LIBRARY_PATH.
    libdir_pc = run(["pkg-config", "--variable=libdir", "lowtide"], pc_env)[1].strip()
    check(libdir_pc == libdir, "pkg-config libdir: %r" % libdir_pc)
    exe_rpath = os.path.join(dest, "use_rpath")
    rc, out, err = run(["cc", "-o", exe_rpath, src] + flags + ["-Wl,-rpath," + dest + libdir_pc], env)
    check(rc == 0, "cc with -Wl,-rpath: %s" % err)
    if rc == 0:
        # meson test sets LD_LIBRARY_PATH to the build's src/, which ld.so
        # would search before the rpath.
        no_llp = {k: v for k, v in env.items() if k != "LD_LIBRARY_PATH"}
        rc, out, err = run([exe_rpath], no_llp)
        check(rc == 0 and out.split()[1:] == ["1"], "rpath-linked program runs with lowtide's malloc: %r %s" % (out, err))
        rc, out, err = run(["ldd", exe_rpath], no_llp)
        check(os.path.join(dest + libdir, "liblowtide.so") in out, "ldd resolves liblowtide.so by the rpath: %s" % out)

finish()
