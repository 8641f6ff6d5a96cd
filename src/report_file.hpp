// Where a report goes: stderr (fd 2, by write(2) only) or a file, created
// so that nobody else can steer it (docs/security.md):
// - a new file is written under an unpredictable temporary name in the same
//   directory, created O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC with mode 0600,
//   checked with fstat, then renamed over the final name;
// - the directory is opened once and everything after is done relative to
//   it; a symlink on the way to it is followed only if it is ours or root's;
// - a symlink at the final name is followed only if it is ours or root's
//   (stricter than the kernel's fs.protected_symlinks), and only to a FIFO,
//   a device or a socket; a link to a regular file, a dangling link or
//   another user's link is refused (a warning, the report on stderr) and
//   left alone: nothing is ever created or truncated through a link;
// - something that is not a regular file (a FIFO, /dev/null, a terminal) is
//   opened without O_CREAT and written to; a FIFO nobody reads fails rather
//   than hangs;
// - every descriptor is opened and closed inside a window of the fork gate,
//   or recorded for fork's child handler to close (fork_child_fds), so no
//   forked child keeps one;
// - in an AT_SECURE process no file is written at all (EPERM);
// - with fd 2 closed or not writable, a report for stderr is dropped and
//   counted, never sent through a path such as /dev/stderr.
// Nothing here allocates, and SIGPIPE from a reader that went away is
// swallowed, so a report never changes how the process ends.
#pragma once
#include <cstddef>
#include <cstdint>

#include "report_out.hpp"

namespace lowtide::report {

// Path names meaning fd 2: "stderr", "", "/dev/stderr", "/dev/fd/2",
// "/proc/self/fd/2".
bool is_stderr(const char* path);

// Write body to fd 2. -1 with errno EBADF (and one more dropped report) when
// fd 2 is closed or read-only.
int write_stderr(const char* body, std::size_t n);

constexpr std::size_t kPathMax = 4096;  // PATH_MAX
// Room for the names write_path works with (taken from the report's Scratch,
// not the stack: the report may run on a small signal stack): the expanded
// path, two buffers for walking its directory part and a link's target,
// a component and the final name.
struct PathBuf {
  char target[kPathMax], tmp[kPathMax], dir[kPathMax];
  char name[256], base[256];  // a component on the way; the final name
};

// Write body to `path` ("%p" = pid, "%%" = '%'), as above. On failure writes
// one warning, and the body to fd 2 when it is writable (`periodic`: a
// report rewritten every interval, only one warning per process and no
// body); returns -1 with errno set.
int write_path(const char* path, const char* body, std::size_t n, bool secure, PathBuf* pb, bool periodic = false);

// "%p" -> pid, "%%" -> "%" of pattern into out[kPathMax], NUL-terminated;
// false (out unspecified) when the result would not fit.
bool expand_path(const char* pattern, char* out);

// Reports dropped because fd 2 was closed or not writable.
std::uint64_t dropped();

// fork's child handler (report::on_fork_child): closes the descriptors of a
// report another thread of the parent was writing through a FIFO, a socket
// or a device when the fork came (write_path leaves the fork gate's window
// for that write, which may take 2 s).
void fork_child_fds();

}  // namespace lowtide::report
