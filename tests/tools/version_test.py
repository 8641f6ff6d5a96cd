"""One version, meson's project version, everywhere:

  version_test.py LAUNCHER BUILD_DIR VERSION

`lowtide --version` from the source tree, lowtide_version() through the
Python helper, the text report's first line and the JSON report's
"version" key all say VERSION."""
import json
import os
import sys
import tempfile

from tools_common import check, clean_env, finish, run

launcher, build, version = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
lib = os.path.realpath(os.path.join(build, "src", "liblowtide.so"))
env = clean_env(LOWTIDE_BUILD_DIR=build)

rc, out, err = run([launcher, "--version"], env)
check(rc == 0 and out == "lowtide %s\n" % version, "lowtide --version: %r %r" % (out, err))
rc, out, err = run([launcher, "--version", "lib"], env)
check(rc == 2 and out == "", "--version takes no subcommand: rc %d" % rc)

with tempfile.TemporaryDirectory(prefix="lowtide-version-") as tmp:
    for fmt in ("text", "json"):
        path = os.path.join(tmp, "r." + fmt)
        rc, out, err = run([launcher, "run", "--stats", fmt, "--stats-file", path, "--",
                            "/usr/bin/python3", "-c", "import lowtide; print(lowtide.version())"],
                           dict(env, PYTHONPATH=os.environ.get("PYTHONPATH", "")))
        check(rc == 0 and out == version + "\n", "lowtide.version(): %r %r" % (out, err))
        with open(path) as f:
            if fmt == "text":
                first = f.readline()
                check(first.startswith("==== lowtide %s report: pid " % version),
                      "text report's first line: %r" % first)
            else:
                check(json.load(f)["version"] == version, "JSON report's version key")
finish()
