"""The file system side of storage: the owners' folders made as root (`folders`), and file
operations done as a job account by a short-lived helper (`fileops`). docs/storage.md."""
