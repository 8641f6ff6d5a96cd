"""The `lowtide` command's implementation (scripts/lowtide is the entry
point): run, lib, compare, report."""
