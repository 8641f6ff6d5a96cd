"""scripts/demo with the build directory given as an absolute path in
LOWTIDE_BUILD_DIR (the launcher takes it "relative to the repository root,
or absolute", docs/usage.md): it must find that build's library and print
the README's table, on a small workload (2 x 16 MB).

  demo_test.py SOURCE_ROOT BUILD_DIR"""
import os
import sys

from tools_common import check, clean_env, finish, run

root, build = sys.argv[1], os.path.abspath(sys.argv[2])
env = clean_env(LOWTIDE_BUILD_DIR=build)
rc, out, err = run([os.path.join(root, "scripts", "demo"), "--total", "16MB", "--threads", "2"], env,
                   timeout=280)
check(rc == 0, "scripts/demo with LOWTIDE_BUILD_DIR=%s: exit %d, %r" % (build, rc, err[-1000:]))
header = [ln for ln in out.splitlines() if ln.startswith("| RSS (MiB) |")]
check(len(header) == 1 and header[0].rstrip(" |").endswith("lowtide"),
      "the README's table, lowtide last: %r" % out[-1500:])
finish()
