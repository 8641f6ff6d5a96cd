"""`lowtide stats PID` and `lowtide top PID`: a running process's counters,
read from outside through its lowtide-live socket (src/live.cpp), without a
signal and without stopping it.

The process answers one request line, "stats", with one JSON document:
{"schema": "lowtide-live", ..., "memory": {...}, "report": {the JSON report}}.
The socket is abstract (no file): "\\0lowtide/<pid namespace inode>/<pid>",
the pid as the process itself sees it (NSpid's last field), so it is found
from the host too, given its network namespace (nsenter -t PID -n). Where
another process held that name when the process started, the process binds
the name followed by "/<16 random hex digits>", found in /proc/net/unix
(candidates()); whatever the name, only the process itself is believed
(check_peer)."""
import errno
import json
import os
import socket
import struct
import sys
import time

from .proctree import task_texts
from .units import human, printable

REQUEST = b"stats\n"


class LiveError(Exception):
    pass


def _nspid(pid):
    """The pid as the process sees itself (innermost pid namespace).
    /proc/PID/status is read with errors="replace": its Name: line is the
    process's own choice of bytes (its file name, prctl), not always UTF-8."""
    try:
        with open("/proc/%d/status" % pid, errors="replace") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except OSError:
        pass
    return pid


def socket_names(pid):
    """The names to try, most specific first."""
    nspid = _nspid(pid)
    names = []
    # Another user's namespace links cannot be read: then ours is the best
    # guess (a process of another user in our pid namespace).
    for ns in ("/proc/%d/ns/pid" % pid, "/proc/self/ns/pid"):
        try:
            names.append("lowtide/%d/%d" % (os.stat(ns).st_ino, nspid))
            break
        except OSError:
            pass
    names.append("lowtide/0/%d" % nspid)
    return names


def _other_netns(pid):
    try:
        return os.readlink("/proc/%d/ns/net" % pid) != os.readlink("/proc/self/ns/net")
    except OSError:
        return False


# How long a process whose lowtide-live thread has no socket name yet is
# waited for (the thread makes it within milliseconds of its start).
NAME_WAIT = 2.0


def _has_live_thread(pid):
    """Whether pid has a thread named lowtide-live (False where its threads
    cannot be read)."""
    return any(comm.strip() == "lowtide-live" for comm in task_texts(pid, "comm"))


def _named(pid):
    """Whether one of pid's names, or a name under one, is listed in
    /proc/net/unix (this network namespace's)."""
    listeners = _listeners()
    return any(n in listeners or any(l.startswith(n + "/") for l in listeners) for n in socket_names(pid))


def _not_reachable(pid):
    msg = ("pid %d has no lowtide socket. It is reachable only when it runs under lowtide with "
           "LOWTIDE_LIVE=on (the default), has made a large allocation (the socket is opened with the "
           "lowtide-decay thread: not with LOWTIDE_DECAY_THREAD=off or LOWTIDE_CACHE=0) and is not "
           "setuid/setgid." % pid)
    if _other_netns(pid):
        msg += (" It is in another network namespace (a container?): abstract sockets are per network "
                "namespace; run `nsenter -t %d -n lowtide stats %d` or run lowtide inside the container."
                % (pid, pid))
    return msg


# An answer holds the counters and the JSON report: tens of KiB, a few MiB
# with thousands of threads. Anything past this is not lowtide's answer.
MAX_ANSWER = 64 << 20


def peer_of(s):
    """(pid, uid, gid) of the process that made the listening socket s is
    connected to, as the kernel saw it at listen() (SO_PEERCRED, struct
    ucred), in our pid and user namespaces (pid 0: not visible in ours)."""
    fmt = "3i"
    return struct.unpack(fmt, s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize(fmt)))


def _euids(pid):
    """The uids the peer of pid's own socket may have: its effective uid
    (SO_PEERCRED's), the owner of /proc/PID (root while it is not dumpable)."""
    uids = set()
    try:
        uids.add(os.stat("/proc/%d" % pid).st_uid)
        with open("/proc/%d/status" % pid, errors="replace") as f:
            for line in f:
                if line.startswith("Uid:"):
                    uids.add(int(line.split()[2]))
    except (OSError, ValueError, IndexError):
        pass
    return uids


def check_peer(s, name, pid):
    """Raises LiveError unless the socket's listener is process pid itself
    (or root). Abstract names belong to whoever binds them first: another
    local user can take the names of pids still to come; the process with
    that pid then cannot bind its own (EADDRINUSE) and the squatter would
    answer in its place. The uid check also covers a listener made by a
    process that had this pid before and handed its socket on."""
    try:
        ppid, puid, _ = peer_of(s)
    except OSError as e:
        raise LiveError("cannot identify the process behind @%s: %s" % (name, e))
    if ppid != pid:
        raise LiveError("refusing the answer on @%s: it comes from %s (uid %d), not from pid %d (uid %s): "
                        "another process holds the name, so pid %d could not bind it"
                        % (name, "pid %d" % ppid if ppid else "a process outside our pid namespace", puid,
                           pid, _owner(pid), pid))
    uids = _euids(pid)
    if puid != 0 and puid not in uids:
        raise LiveError("refusing the answer on @%s: its listener has uid %d, but pid %d runs as uid %s"
                        % (name, puid, pid, "/".join(str(u) for u in sorted(uids)) or "?"))


# A process whose name another process held when it started binds
# "<name>/<16 hex digits>" instead (src/live.cpp, open_socket).
SUFFIX_DIGITS = 16
# Listening sockets in /proc/net/unix (__SO_ACCEPTCON in the Flags column).
SO_ACCEPTCON = 0x10000


def _listeners():
    """{name: [inode, ...]} of the listening abstract sockets named
    lowtide/... in our network namespace (/proc/net/unix; the name without
    its leading @). The names are anyone's choice, a newline included: a
    line read here is only ever a name to try, never a reason to believe."""
    out = {}
    try:
        with open("/proc/net/unix", errors="replace") as f:
            next(f, None)
            for line in f:
                w = line.rstrip("\n").split(None, 7)
                try:
                    # A line that does not parse (a name with a newline in
                    # it makes two) is skipped, not the rest of the file.
                    if len(w) == 8 and w[7].startswith("@lowtide/") and int(w[3], 16) & SO_ACCEPTCON:
                        out.setdefault(w[7][1:], []).append(int(w[6]))
                except ValueError:
                    continue
    except OSError:
        pass
    return out


def _socket_inodes(pid):
    """The inodes of the sockets pid holds (its /proc/PID/fd), or None where
    we may not look (another user's process, one that is not dumpable)."""
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return None
    inodes = set()
    for fd in fds:
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:[") and link.endswith("]"):
            try:
                inodes.add(int(link[8:-1]))
            except ValueError:
                pass
    return inodes


def candidates(pid):
    """[(name, whose)] to try, in order. whose: "own" where the name's
    socket is one pid holds (its /proc/PID/fd), "other" where it is not,
    None where that cannot be told (not listed: another network namespace;
    or we may not read /proc/PID/fd). The names: socket_names(pid), then
    each listed "<one of them>/<16 hex digits>", the name the process binds
    where another process held its own when it started. The process's own
    first, then the unknown, the others' last (tried once, for the error
    message). Whoever answers is still checked (check_peer)."""
    mains = socket_names(pid)
    listeners = _listeners()
    extra = sorted(n for n in listeners for m in mains
                   if n.startswith(m + "/") and len(n) == len(m) + 1 + SUFFIX_DIGITS
                   and all(c in "0123456789abcdef" for c in n[len(m) + 1:]))
    inodes = _socket_inodes(pid)

    def whose(n):
        if inodes is None or n not in listeners:
            return None
        return "own" if any(i in inodes for i in listeners[n]) else "other"

    rank = {"own": 0, None: 1, "other": 2}
    return sorted(((n, whose(n)) for n in mains + extra), key=lambda c: rank[c[1]])


# While the process's live server is paused (another user flooding it with
# connections: src/live.cpp, Budget), its backlog is full and connect
# refuses (EAGAIN). A blocking connect waits for room and is woken at each
# accept; it waits this long at a time, then the next name gets its turn.
CONNECT_SLICE = 0.25


def _connect(name, wait):
    """A socket connected to @name, or None where nobody listens there,
    or "busy" where its backlog stayed full for wait seconds (0: one try)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if wait > 0:
            s.settimeout(None)  # blocking, for SO_SNDTIMEO to bound connect
            sec = int(wait)
            usec = int((wait - sec) * 1e6)
            if sec == 0:
                usec = max(usec, 1)  # 0 s 0 us would be no limit at all
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", sec, usec))
        else:
            s.setblocking(False)
        s.connect("\0" + name)
        return s
    except OSError as e:
        s.close()
        if e.errno in (errno.ECONNREFUSED, errno.ENOENT):
            return None
        if e.errno in (errno.EAGAIN, errno.EINPROGRESS):
            return "busy"
        raise LiveError("cannot connect to %s: %s" % (name, e))


def query(pid, timeout=10.0):
    """The process's answer, parsed. Raises LiveError with what to do.
    Only pid itself (or root) is believed: see check_peer."""
    if not os.path.exists("/proc/%d" % pid):
        raise LiveError("no process %d" % pid)
    deadline = time.monotonic() + timeout
    pending = candidates(pid)
    # The server makes its socket on its own thread, a moment after the
    # large allocation that started it (src/live.cpp, open_listening): a
    # process with a lowtide-live thread and no name yet is waited for.
    # Not one in another network namespace: its name is never listed in
    # ours (_named reads our /proc/net/unix), so the wait would only delay
    # the "not reachable" answer (and its nsenter hint) by NAME_WAIT.
    born = time.monotonic() + min(timeout, NAME_WAIT)
    while (not _named(pid) and time.monotonic() < born and not _other_netns(pid)
           and _has_live_thread(pid)):
        time.sleep(0.02)
        pending = candidates(pid)
    errors = []
    while pending:
        busy = []
        for name, whose in pending:
            wait = 0 if whose == "other" else min(CONNECT_SLICE, max(0.0, deadline - time.monotonic()))
            s = _connect(name, wait)
            if s is None:
                continue
            if s == "busy":
                if whose == "other":
                    errors.append(LiveError("@%s is not pid %d's socket and does not accept" % (name, pid)))
                else:
                    busy.append((name, whose))
                continue
            try:
                # Before a byte is sent or read: a squatter learns nothing
                # and gets nothing printed.
                check_peer(s, name, pid)
            except LiveError as e:
                s.close()
                errors.append(e)
                continue
            return _exchange(s, pid, timeout)
        pending = busy
        if pending and time.monotonic() >= deadline:
            raise LiveError("pid %d did not accept a connection within %.0f s: its live server is pausing "
                            "(flooded with connections by another user?)" % (pid, timeout))
    if errors:
        raise errors[0]
    raise LiveError(_not_reachable(pid))


def _exchange(s, pid, timeout):
    """Sends the request on s (connected, checked) and reads the answer."""
    chunks, size = [], 0
    try:
        s.settimeout(timeout)
        s.sendall(REQUEST)
        deadline = time.monotonic() + timeout
        while True:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            b = s.recv(1 << 16)
            if not b:
                break
            size += len(b)
            if size > MAX_ANSWER:
                raise LiveError("pid %d sent more than %d MiB: not a lowtide answer; stopped reading"
                                % (pid, MAX_ANSWER >> 20))
            chunks.append(b)
    except socket.timeout:
        raise LiveError("pid %d did not answer within %.0f s" % (pid, timeout))
    except OSError as e:
        # A refused peer is closed without its request being read: the
        # kernel may say so with a reset rather than an end of file.
        if not (e.errno in (errno.ECONNRESET, errno.EPIPE) and not chunks):
            raise LiveError("reading from pid %d: %s" % (pid, e))
    finally:
        s.close()
    data = b"".join(chunks)
    if not data:
        raise LiveError("pid %d refused the query: it answers only its own user (uid %s) or root"
                        % (pid, _owner(pid)))
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise LiveError("pid %d sent an answer that is not JSON (%s): %r" % (pid, e, data[:200]))
    except RecursionError:
        # Nested deeper than Python's recursion limit (json.loads recurses
        # once per level): no answer of lowtide's is (it is 8 levels deep).
        raise LiveError("pid %d sent JSON nested too deeply to be a lowtide-live answer" % pid) from None
    if not isinstance(doc, dict) or doc.get("schema") != "lowtide-live":
        raise LiveError("pid %d sent JSON that is not a lowtide-live answer" % pid)
    return doc


def _owner(pid):
    try:
        return os.stat("/proc/%d" % pid).st_uid
    except OSError:
        return "?"


def parts(mem):
    """The resident parts that add up to RSS, in display order: (label, bytes, note)."""
    return [
        ("small blocks", mem["small_resident"],
         "mimalloc: %s committed, %s live%s" % (human(mem["small_committed"]), human(mem["small_used"]),
                                                # /proc/self/maps not read this time (src/live.cpp)
                                                "; last known value" if mem.get("small_resident_last_known") else "")),
        ("large blocks live", mem["large_live"],
         "%d blocks, %s handed out" % (mem["large_blocks"], human(mem["large_usable"]))),
        ("reuse cache", mem["cache"], "freed large blocks kept for reuse"),
        ("pending release", mem["pending_release"], "decayed; returned at the decay thread's next wake-up"),
        ("rest: files", mem["rest_files"], "code, libraries, mapped files, shared memory"),
        ("rest: other", mem["rest_other"], "stacks, lowtide's and others' anonymous mappings"),
    ]


def thread_live(t):
    return t["small"]["live"] + t["large"]["live"]


def top_threads(report, n):
    rows = [t for t in report.get("threads", []) if not t.get("folded")]
    rows.sort(key=thread_live, reverse=True)
    return rows[:n]


def _frame_name(f):
    if f.get("function"):
        return f["function"]
    return "%s+0x%x" % (os.path.basename(f.get("module") or "?"), f.get("offset", 0))


def top_sites(report, n):
    sites = report.get("sites") or {}
    if not sites.get("enabled"):
        return None
    rows = sorted(sites.get("top", []), key=lambda s: s.get("live_bytes", 0), reverse=True)
    return rows[:n]


# What a document of the right schema but with missing fields or fields of
# the wrong type raises in render() and top_line().
MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError)


def render(doc, nthreads=5, nsites=5):
    """The answer as text, each line printable(): the strings in it are
    the process's own choice (command line, thread names, symbols; any
    field, from a process that answers for itself)."""
    mem, rep = doc["memory"], doc["report"]
    out = []
    out.append("lowtide stats: pid %d (%s), up %.1f s%s" % (
        doc["pid"], rep.get("command", "?")[:60], rep.get("uptime_s", 0),
        ", PARTIAL (a lock was held)" if rep.get("partial") else ""))
    out.append("%-20s %12s   (%s)" % ("RSS", human(mem["rss"]), mem["rss_source"]))
    for label, v, note in parts(mem):
        out.append("  %-18s %12s   %s" % (label, human(v), note))
    # How the process counts its resident pages (src/platform.cpp): by
    # PAGEMAP_SCAN from Linux 6.7, by mincore before it or where the scan
    # is refused; which one, the answer does not say.
    out.append("  (the parts add up to RSS: \"other\" is what is left; each part is resident pages, "
               "read from the page tables)")
    rows = top_threads(rep, nthreads)
    if rows:
        out.append("")
        out.append("threads by live bytes (top %d; a block counts on the thread that freed it)" % len(rows))
        out.append("%8s  %-16s %12s %12s %12s" % ("tid", "name", "live", "small", "large"))
        for t in rows:
            out.append("%8s  %-16s %12s %12s %12s" % (t["tid"], t["name"][:16], human(thread_live(t)),
                                                    human(t["small"]["live"]), human(t["large"]["live"])))
    sites = top_sites(rep, nsites)
    if sites is not None:
        out.append("")
        out.append("call sites by live bytes (top %d, LOWTIDE_SITES)" % len(sites))
        for s in sites:
            frames = s.get("frames") or []
            where = " < ".join(_frame_name(f) for f in frames[:3]) or "?"
            out.append("  %12s in %6d blocks  %s" % (human(s.get("live_bytes", 0)), s.get("live_blocks", 0), where))
    return "\n".join(printable(line) for line in out)


def main_stats(pid, as_json=False, timeout=10.0):
    try:
        doc = query(pid, timeout)
    except LiveError as e:
        print("lowtide stats: %s" % e, file=sys.stderr)
        return 1
    if as_json:
        # json.dump escapes every control character (and, ensure_ascii,
        # every non-ASCII one): nothing of the process's reaches the
        # terminal raw.
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    try:
        text = render(doc)
    except MALFORMED as e:
        print("lowtide stats: pid %d sent a malformed answer (%s)" % (pid, printable(repr(e))), file=sys.stderr)
        return 1
    print(text)
    return 0


TOP_HEADER = "%-8s %10s %10s %10s %10s %10s %10s  %s" % (
    "time", "rss", "small", "large", "cache", "pending", "rest", "top thread (live)")


def top_line(doc):
    mem = doc["memory"]
    rows = top_threads(doc["report"], 1)
    who = "%s %s (%s)" % (rows[0]["tid"], rows[0]["name"], human(thread_live(rows[0]))) if rows else "-"
    return printable("%-8s %10s %10s %10s %10s %10s %10s  %s" % (
        time.strftime("%H:%M:%S"), human(mem["rss"]), human(mem["small_resident"]), human(mem["large_live"]),
        human(mem["cache"]), human(mem["pending_release"]), human(mem["rest"]), who))


def main_top(pid, interval=1.0, count=None, timeout=10.0):
    n = 0
    try:
        while count is None or n < count:
            if n % 20 == 0:
                print(TOP_HEADER, flush=True)
            try:
                doc = query(pid, timeout)
            except LiveError as e:
                print("lowtide top: %s" % e, file=sys.stderr)
                return 1
            try:
                line = top_line(doc)
            except MALFORMED as e:
                print("lowtide top: pid %d sent a malformed answer (%s)" % (pid, printable(repr(e))),
                      file=sys.stderr)
                return 1
            print(line, flush=True)
            n += 1
            if count is None or n < count:
                time.sleep(interval)
    except KeyboardInterrupt:
        return 0
    return 0
