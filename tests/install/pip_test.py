"""`pip install` of the source tree into a virtualenv, offline, and what it
installs used from there:

  pip_test.py SOURCE_ROOT VERSION

A copy of the source tree (meson-python writes into the tree it builds) is
installed with `pip install --no-build-isolation --no-index` into a venv
made with --system-site-packages (Debian's meson-python and numpy). Then:
the build had the tests off and the library in the package; the venv's
`lowtide` command reports the project's version, finds the library that
came with it, runs a command with it preloaded (the child's /proc/self/maps
names the venv's liblowtide.so), and `import lowtide` there is the venv's
helper and sees lowtide active."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from lttest import check, clean_env, finish, run  # noqa: E402

src_root, version = sys.argv[1:3]


def copy_tree(dst):
    """The files of the working tree that git knows or would add (no build
    directories); a plain copy without them if this is not a git checkout."""
    try:
        names = subprocess.run(["git", "-C", src_root, "ls-files", "-co", "--exclude-standard", "-z"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True,
                               timeout=60).stdout.decode().split("\0")
    except (OSError, subprocess.SubprocessError):
        names = None
    if not names or names == [""]:
        def skip(d, entries):
            return [e for e in entries if e == ".git" or os.path.isdir(os.path.join(d, e, "meson-private"))]
        shutil.copytree(src_root, dst, ignore=skip, symlinks=True)
        return
    for n in names:
        if not n:
            continue
        s = os.path.join(src_root, n)
        if not os.path.lexists(s):  # deleted in the work tree, not yet in the index
            continue
        d = os.path.join(dst, n)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        shutil.copy2(s, d, follow_symlinks=False)


with tempfile.TemporaryDirectory(prefix="lowtide-pip-") as tmp:
    src = os.path.join(tmp, "src")
    venv = os.path.join(tmp, "venv")
    build = os.path.join(tmp, "build")
    copy_tree(src)
    env = clean_env()
    for k in [k for k in env if k.startswith("PIP_") or k in ("PYTHONPATH", "VIRTUAL_ENV")]:
        del env[k]
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    rc, out, err = run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv], env, timeout=120)
    check(rc == 0, "venv: %s" % err)
    py = os.path.join(venv, "bin", "python3")
    rc, out, err = run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
                        "--config-settings", "builddir=" + build, src], env, timeout=900, cwd=tmp)
    if not check(rc == 0, "pip install: rc %d\n%s\n%s" % (rc, out[-3000:], err[-3000:])):
        finish()

    # What was built: the library and the launcher's files, no tests, no
    # benchmarks, the library laid out for the package.
    with open(os.path.join(build, "meson-info", "intro-buildoptions.json")) as f:
        opts = {o["name"]: o["value"] for o in json.load(f)}
    check(opts.get("tests") is False and opts.get("python_package") is True,
          "pyproject.toml's setup args reached meson: tests=%r python_package=%r"
          % (opts.get("tests"), opts.get("python_package")))
    with open(os.path.join(build, "meson-info", "intro-targets.json")) as f:
        targets = json.load(f)
    dirs = sorted({os.path.relpath(os.path.dirname(t["filename"][0]), build) for t in targets})
    check(not [d for d in dirs if d.split(os.sep)[0] in ("tests", "bench")],
          "no test or benchmark target in the pip build: %s" % dirs)
    check(not os.path.exists(os.path.join(build, "tests")), "no tests/ directory in the pip build")

    site = run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"], env, timeout=60)[1].strip()
    lib = os.path.join(site, "lowtide_cli", "liblowtide.so")
    check(os.path.isfile(lib), "the library is in the package: %s" % lib)
    check(os.path.isfile(os.path.join(site, "lowtide.py")), "lowtide.py installed in the venv")
    for name in ("lowtide.h", "lowtide.pc"):
        found = [os.path.join(d, f) for d, _, fs in os.walk(venv) for f in fs if f == name]
        check(not found, "pip installs no %s: %s" % (name, found))

    lowtide = os.path.join(venv, "bin", "lowtide")
    check(os.access(lowtide, os.X_OK), "venv/bin/lowtide installed")
    with open(lowtide) as f:
        first = f.readline().strip()
    check(first == "#!" + py, "the command runs the venv's python: %r" % first)

    rc, out, err = run([lowtide, "--version"], env, timeout=60, cwd=tmp)
    check(rc == 0 and out.strip() == "lowtide " + version, "lowtide --version: %r %r" % (out, err))
    rc, out, err = run([lowtide, "lib"], env, timeout=60, cwd=tmp)
    check(rc == 0 and out.strip() == os.path.realpath(lib), "lowtide lib -> %r (%s)" % (out, err))

    probe = ("import json, lowtide\n"
             "print(json.dumps({'active': lowtide.active(), 'version': lowtide.version(),"
             " 'maps': sorted({l.split()[-1] for l in open('/proc/self/maps') if 'liblowtide' in l}),"
             " 'helper': lowtide.__file__}))")
    report = os.path.join(tmp, "r.json")
    rc, out, err = run([lowtide, "run", "--stats", "json", "--stats-file", report, "--", py, "-c", probe],
                       env, timeout=120, cwd=tmp)
    check(rc == 0, "lowtide run from the venv: rc %d %s" % (rc, err))
    if rc == 0:
        got = json.loads(out)
        check(got["maps"] == [os.path.realpath(lib)], "the venv's library is the one preloaded: %r" % got)
        check(got["active"] and got["version"] == version, "lowtide.active() and its version: %r" % got)
        check(got["helper"] == os.path.join(site, "lowtide.py"), "the venv's helper imported: %r" % got)
        with open(report) as f:
            check(json.load(f)["version"] == version, "the report carries the version")

    # Without the preload the helper imports and says so.
    rc, out, err = run([py, "-c", "import lowtide; print(lowtide.active())"], env, timeout=60, cwd=tmp)
    check(rc == 0 and out.strip() == "False", "import lowtide without the preload: %r %r" % (out, err))

finish()
