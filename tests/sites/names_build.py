# Builds large buffers on a known line (the test looks for the marker) in a
# function called build, from main.
def build(n):
    buf = b""
    chunk = b"x" * 300000
    for _ in range(n):
        buf += chunk  # BUILD-LINE
    return buf


def main():
    keep = []
    for _ in range(3):
        keep.append(build(12))
    return len(keep)


main()
