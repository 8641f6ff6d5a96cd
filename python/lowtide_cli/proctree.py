"""RSS of a process and all its descendants, from /proc."""
import os

PAGE = os.sysconf("SC_PAGE_SIZE")


PF_EXITING = 0x4  # include/linux/sched.h: the task is tearing down its memory


def _stat(pid):
    """(state, ppid, rss bytes, exiting) of pid, or None if it is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            s = f.read()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: split after its last ")"
    rest = s[s.rindex(b")") + 2:].split()
    return rest[0].decode(), int(rest[1]), int(rest[21]) * PAGE, bool(int(rest[6]) & PF_EXITING)


def task_texts(pid, name):
    """The text of /proc/PID/task/TID/<name> for each thread of pid that
    could be read (none where pid's threads cannot be listed). Bytes that
    are not UTF-8 (a thread's name is its own choice) read as U+FFFD."""
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return
    for tid in tasks:
        try:
            with open("/proc/%d/task/%s/%s" % (pid, tid, name), errors="replace") as f:
                yield f.read()
        except OSError:
            pass


def _children(pid):
    """Child pids of pid, from every thread's children list (each thread
    lists the children it forked)."""
    return [int(x) for text in task_texts(pid, "children") for x in text.split()]


def _children_by_scan(root):
    """ppid -> children over all of /proc: for kernels without the
    children files (CONFIG_PROC_CHILDREN)."""
    kids = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st:
                kids.setdefault(st[1], []).append(int(name))
    return kids


HAVE_CHILDREN_FILES = os.path.exists("/proc/self/task/%d/children" % os.getpid())


def tree_rss(root):
    """(rss bytes summed over root and its live descendants, root alive).
    A process that is exiting counts as gone: its RSS then falls as the
    kernel unmaps its memory, which says nothing about its allocator."""
    st = _stat(root)
    if st is None or st[0] in ("Z", "X") or st[3]:
        return 0, False
    kids = None if HAVE_CHILDREN_FILES else _children_by_scan(root)
    total, todo, seen = 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        st = _stat(pid)
        if st is None or st[0] in ("Z", "X") or st[3]:
            continue
        total += st[2]
        todo.extend(_children(pid) if kids is None else kids.get(pid, []))
    return total, True


def maps_contain(pid, needle):
    """True if a mapping of pid's has needle in its path. Read as bytes: a
    path there need not be UTF-8 (a UnicodeDecodeError ended compare)."""
    needle = os.fsencode(needle)
    try:
        with open("/proc/%d/maps" % pid, "rb") as f:
            return any(needle in line for line in f)
    except OSError:
        return False
