#!/usr/bin/python3
"""git on a generated repository, with and without lowtide: init, add,
commit (300 files over 30 commits, a branch and a merge, fixed dates and
authors so the hashes are reproducible), log, diff, gc --aggressive, repack,
fsck --full, archive. Every output, the commit hashes and the packed
objects' list must be identical between the two runs.

Usage: git_test.py <liblowtide.so>"""
import os
import random
import sys

from real_common import check, check_same_steps, finish, with_and_without


def content(seed, i, n):
    rnd = random.Random(seed * 100003 + i)
    words = ["alloc", "free", "tide", "page", "block", "thread", "cache", "arena", "huge", "small"]
    lines = [" ".join(rnd.choice(words) for _ in range(rnd.randint(3, 12))) for _ in range(n)]
    return "\n".join(lines) + "\n"


def session(runner, work):
    out = []
    ident = dict(GIT_AUTHOR_NAME="Low Tide", GIT_AUTHOR_EMAIL="lt@example.org", GIT_COMMITTER_NAME="Low Tide",
                 GIT_COMMITTER_EMAIL="lt@example.org", GIT_CONFIG_NOSYSTEM="1", HOME=work)

    # pack.threads=1: with several threads git's delta search is not
    # deterministic, so packs (and verify-pack -v) differ between two runs
    # whatever the allocator.
    def git(*args, date=None, ok=True):
        kv = dict(ident)
        if date is not None:
            kv.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
        rc, so, se = runner.run(["git", "-c", "init.defaultBranch=main", "-c", "gc.auto=0", "-c", "pack.threads=1", *args], cwd=repo,
                                **kv)
        if ok:
            check(rc == 0, f"git {' '.join(args)}: exit {rc}: {se.decode(errors='replace')[-500:]}")
        out.append((args, rc, so))
        return so.decode(errors="replace")

    repo = os.path.join(work, "repo")
    os.makedirs(repo)
    git("init", "-q")
    t = 1700000000
    for c in range(30):
        for i in range(10):
            f = os.path.join(repo, f"dir{i % 7}", f"file{(c * 10 + i) % 300}.txt")
            os.makedirs(os.path.dirname(f), exist_ok=True)
            # a few large files too: big blobs and deltas
            with open(f, "w") as fh:
                fh.write(content(c, i, 4000 if i == 0 else 40))
        git("add", "-A")
        git("commit", "-q", "-m", f"commit {c}", date=f"{t + c * 3600} +0000")
        if c == 15:
            git("checkout", "-q", "-b", "side")
        if c == 22:
            git("checkout", "-q", "main")
    git("merge", "-q", "--no-ff", "-m", "merge side", "side", date=f"{t + 40 * 3600} +0000")
    git("log", "--stat", "--format=%H %an %ad %s", "--date=iso")
    git("diff", "--stat", "HEAD~5", "HEAD")
    git("gc", "-q", "--aggressive", "--prune=now")
    git("repack", "-adf", "-q")
    git("fsck", "--full", "--strict")
    git("count-objects", "-v")
    git("verify-pack", "-v", *[os.path.join(".git", "objects", "pack", p)
                               for p in sorted(os.listdir(os.path.join(repo, ".git", "objects", "pack")))
                               if p.endswith(".idx")])
    git("archive", "--format=tar", "HEAD")
    git("rev-parse", "HEAD", "main", "side")
    return out


def main():
    lib = sys.argv[1]
    plain, lt = with_and_without(lib, "git", session)
    check_same_steps("git", [(" ".join(c), rc, o) for c, rc, o in plain], [(" ".join(c), rc, o) for c, rc, o in lt])
    print(f"git: {len(lt)} commands, identical output with and without lowtide; HEAD "
          f"{lt[-1][2].decode().split()[0] if lt[-1][2] else '?'}")
    finish("git")


if __name__ == "__main__":
    main()
