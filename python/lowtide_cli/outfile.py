"""The files the CLI writes, made so that no link someone else planted is
followed (docs/security.md, the library's rules for its reports): a new
file under a name nobody can predict, O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC,
fstat'ed, then renamed over the final name. `lowtide compare` writes its
outputs into --out this way (create_new, put_in_place, write_new);
`lowtide report --flame/--collapsed` write a path the user gave
(write_path), which may also be a FIFO or a device such as /dev/stdout,
never replaced by a rename."""
import errno
import os
import secrets
import stat


class Refused(OSError):
    """A final name that is not written, and why (its strerror)."""

    def __init__(self, why):
        super().__init__(errno.EPERM, why)


def _name(out, name, dir_fd):
    """name in the directory out, or relative to dir_fd when that is given."""
    return name if dir_fd is not None else os.path.join(out, name)


def create_new(out, dir_fd=None):
    """A new file in the directory out (or dir_fd): (binary file object,
    its name). --out may be a shared directory (/tmp/cmp, made by someone
    else): opening DIR/glibc.out wrote through whatever link that someone
    had planted there."""
    while True:
        tmp = _name(out, ".lowtide-%s.tmp" % secrets.token_hex(8), dir_fd)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
                         dir_fd=dir_fd)
        except FileExistsError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # O_EXCL made it: never, unless the kernel lies
                raise Refused("%s: not a regular file once created" % tmp)
        except BaseException:
            os.close(fd)
            discard(tmp, dir_fd)
            raise
        return os.fdopen(fd, "wb"), tmp


def put_in_place(tmp, out, name, dir_fd=None):
    """Renames tmp over out/name (a link there is replaced, not followed);
    removes tmp if that fails."""
    try:
        os.rename(tmp, _name(out, name, dir_fd), src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError:
        discard(tmp, dir_fd)
        raise


def discard(tmp, dir_fd=None):
    try:
        os.unlink(tmp, dir_fd=dir_fd)
    except OSError:
        pass


def write_new(out, name, write, dir_fd=None):
    """out/name made by create_new and put_in_place, its content written by
    write(binary file object)."""
    f, tmp = create_new(out, dir_fd)
    try:
        with f:
            write(f)
    except BaseException:
        discard(tmp, dir_fd)
        raise
    put_in_place(tmp, out, name, dir_fd)


def _ours(st):
    return st.st_uid in (os.geteuid(), 0)


def write_path(path, data):
    """data (bytes) written to the file the user named: path as given on the
    command line, whose directory may be shared with others (/tmp, a
    directory another user made). What is at the final name decides, as for
    the library's reports (docs/security.md):

      nothing, or a regular file: a new file made there (create_new) and
        renamed over it;
      a FIFO, a character device or a socket of ours or root's (/dev/null,
        a named pipe): opened with O_NOFOLLOW and written, never replaced;
      our own or root's symlink to one of those (/dev/stdout, /dev/fd/N):
        followed, the same;
      any other symlink (another user's, or ours to a regular file, a
        directory or nothing), another user's FIFO, device or socket, a
        block device, a directory: refused (Refused, an OSError), nothing
        written.

    Everything is looked up relative to the directory, opened once. The
    file opened without O_CREAT is fstat'ed: one that is not what was seen
    there a moment before (swapped), or is a regular file, is not written."""
    d, base = os.path.split(path)
    if base in ("", ".", ".."):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    dfd = os.open(d or ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            st = os.stat(base, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is None or stat.S_ISREG(st.st_mode):
            write_new(None, base, lambda f: f.write(data), dir_fd=dfd)
            return
        follow = stat.S_ISLNK(st.st_mode)
        if follow:
            if not _ours(st):
                raise Refused("a symlink of another user (uid %d): not followed" % st.st_uid)
            try:
                st = os.stat(base, dir_fd=dfd)
            except FileNotFoundError:
                raise Refused("a symlink to nothing: not followed (nothing is created through a link)") from None
            if stat.S_ISREG(st.st_mode):
                raise Refused("a symlink to a regular file: not followed (give the file's own path)")
            if stat.S_ISDIR(st.st_mode):
                raise Refused("a symlink to a directory: not followed")
        _write_special(dfd, base, st, follow, data)
    finally:
        os.close(dfd)


def _write_special(dfd, base, st, follow, data):
    """write_path's case of a FIFO, a device or a socket at base (follow:
    reached through a link of ours or root's); st: its stat."""
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
    if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)):
        raise Refused("a block device: not written")
    if not _ours(st):
        # That user could read what is written, or hold us on a FIFO never read.
        raise Refused("a %s of another user (uid %d): not written"
                      % ("FIFO" if stat.S_ISFIFO(mode) else "device or socket", st.st_uid))
    # No O_CREAT (nothing is made through a link), no O_TRUNC (a device).
    fd = os.open(base, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW), dir_fd=dfd)
    with os.fdopen(fd, "wb") as f:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or stat.S_ISREG(now.st_mode):
            raise Refused("changed while it was being opened: not written")
        f.write(data)
