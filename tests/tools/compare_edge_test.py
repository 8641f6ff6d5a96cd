"""`lowtide compare` on what a user may give it, one case per meson test:

  compare_edge_test.py CASE LAUNCHER BUILD_DIR

  nonutf8_arg   an argument and an --out that are not UTF-8 (a file name
                from a Latin-1 system): the table and compare.md are still
                written, the bytes shown escaped, no traceback
  nonutf8_prog  a program whose file name is not UTF-8: its path is in its
                /proc/PID/maps, which compare reads to see the preload
  planted       (root) an --out directory made by another user (nobody),
                holding that user's symlinks at every name compare writes
                (glibc.out, lowtide.err, compare.md, samples.json, rss.png)
                pointing at files of ours: none of them is written through;
                each output is a regular file of ours, renamed over the
                link (docs/security.md: never follow a planted symlink)"""
import os
import sys
import tempfile

from tools_common import check, clean_env, finish, run

case, launcher, build = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])
env = clean_env(LOWTIDE_BUILD_DIR=build)


def compare(args, timeout=120):
    """Runs `lowtide compare --with glibc ARGS` (bytes arguments allowed)."""
    rc, out, err = run([os.fsencode(launcher), b"compare", b"--with", b"glibc"] + args, env, timeout=timeout)
    print(out, err[-3000:], sep="\n")
    return rc, out, err


def case_nonutf8_arg(tmp):
    out = os.path.join(os.fsencode(tmp), b"cmp-\xff")
    rc, stdout, err = compare([b"--out", out, b"--", b"/bin/echo", b"arg-\xfe"])
    check(rc == 0 and "Traceback" not in err, "compare with non-UTF-8 bytes: rc %d" % rc)
    md = os.path.join(out, b"compare.md")
    check(os.path.exists(md), "compare.md written")
    if os.path.exists(md):
        with open(md, "rb") as f:
            text = f.read().decode()  # the Markdown is UTF-8
        check("arg-\\xfe" in text, "the argument shown escaped in compare.md: %r" % text[:300])
        check("| glibc | 0 |" in text and "| lowtide | 0 |" in text, "both rows in compare.md")
        check("| lowtide | 0 |" in stdout, "the table printed")
    with open(os.path.join(out, b"lowtide.out"), "rb") as f:
        check(f.read() == b"arg-\xfe\n", "the command got its argument's bytes unchanged")



def case_nonutf8_prog(tmp):
    prog = os.path.join(os.fsencode(tmp), b"sleep-\xff")
    with open("/bin/sleep", "rb") as src, open(prog, "wb") as dst:
        dst.write(src.read())
    os.chmod(prog, 0o755)
    out = os.path.join(tmp, "cmp")
    rc, stdout, err = compare([b"--out", os.fsencode(out), b"--", prog, b"0.5"])
    check(rc == 0 and "Traceback" not in err, "compare of a program named in Latin-1: rc %d" % rc)
    check("| lowtide | 0 |" in stdout, "the table printed")
    check("was not seen in the process's maps" not in err, "the preload seen in its maps")



def case_planted(tmp):
    if os.geteuid() != 0:
        print("SKIP: needs root (a directory and links owned by another user)")
        return
    os.chmod(tmp, 0o755)
    out = os.path.join(tmp, "shared")
    os.mkdir(out)
    names = ["glibc.out", "glibc.err", "lowtide.out", "lowtide.err", "compare.md", "samples.json", "rss.png"]
    victims = {}
    for n in names:
        victims[n] = os.path.join(tmp, "victim-" + n)
        with open(victims[n], "w") as f:
            f.write("precious\n")
        os.symlink(victims[n], os.path.join(out, n))
        os.lchown(os.path.join(out, n), 65534, 65534)
    os.chown(out, 65534, 65534)
    rc, stdout, err = compare([b"--out", os.fsencode(out), b"--", b"/bin/echo", b"hello"])
    check(rc == 0, "compare into another user's directory: rc %d" % rc)
    for n in names:
        with open(victims[n], "rb") as f:
            check(f.read() == b"precious\n", "%s: nothing written through the planted link" % n)
        st = os.lstat(os.path.join(out, n))
        check(not os.path.islink(os.path.join(out, n)) and st.st_uid == 0,
              "%s: a regular file of ours in its place" % n)
    with open(os.path.join(out, "lowtide.out")) as f:
        check(f.read() == "hello\n", "the command's output is in lowtide.out")
    check(not [n for n in os.listdir(out) if n.endswith(".tmp")], "no temporary file left: %s" % os.listdir(out))


cases = {n[5:]: f for n, f in globals().items() if n.startswith("case_")}
with tempfile.TemporaryDirectory(prefix="lowtide-compare-edge-") as tmp:
    cases[case](tmp)
finish()
