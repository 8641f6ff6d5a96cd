"""scripts/lint's layering rules hold on the tree, and fail when broken:
a copy of src/ with a planted mmap call outside src/platform.* and one with a
planted mi_* call outside src/small_path.* must each make the check fail
and name the file; a call that only appears in a comment or a string must
not.

    layers_test.py SOURCE_ROOT
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from lttest import check, finish  # noqa: E402


def lint(script, tree):
    env = dict(os.environ, LOWTIDE_LINT_LAYERS_ONLY="1", LOWTIDE_LINT_ROOT=tree)
    p = subprocess.run(["bash", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    return p.returncode, p.stdout.decode()


def planted(root, tmp, name, text):
    tree = os.path.join(tmp, name)
    shutil.copytree(os.path.join(root, "src"), os.path.join(tree, "src"))
    with open(os.path.join(tree, "src", "report.cpp"), "a") as f:
        f.write(text)
    return tree


def main():
    root = sys.argv[1]
    script = os.path.join(root, "scripts", "lint")
    rc, out = lint(script, root)
    check(rc == 0 and "layering clean" in out, f"the tree is clean: {out}")
    with tempfile.TemporaryDirectory(prefix="lt-lint-") as tmp:
        tree = planted(root, tmp, "kernel", "\nstatic void bad() { ::madvise(nullptr, 0, 0); }\n")
        rc, out = lint(script, tree)
        check(rc != 0 and "src/report.cpp" in out and "platform" in out, f"a planted madvise fails: {out}")
        tree = planted(root, tmp, "mimalloc", "\nstatic void* bad2() { return mi_malloc(8); }\n")
        rc, out = lint(script, tree)
        check(rc != 0 and "src/report.cpp" in out and "mimalloc" in out, f"a planted mi_malloc fails: {out}")
        tree = planted(root, tmp, "comment", '\n// mmap(x) in a comment\nstatic const char* s = "mi_free(p)";\n')
        rc, out = lint(script, tree)
        check(rc == 0, f"calls named in comments and strings pass: {out}")
    finish("lint layers")


if __name__ == "__main__":
    main()
