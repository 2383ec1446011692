"""Benchmark a gitsess session mount against a native directory and fuse-overlayfs.

Builds a corpus in a temporary directory (a git repository of about 5,000 small files in 400
directories, ~50 MB, plus one 500 MB file git ignores), then measures the same workloads on
three views of that one tree, in one run: the directory itself (native), fuse-overlayfs over it,
and a gitsess session mount over it. Every figure is the median of several runs; cold runs drop
the page cache first (root only). Also measured: session creation + first mount (`gitsess new`
then `gitsess mount`, and the one command `gitsess new --mount`) against `git worktree add` on a
5,000- and a 50,000-file repository, `gitsess diff` / `apply --commit` of 1,000 changed files
(once the CLI has them), the FUSE daemons' CPU time per run and their peak memory (VmHWM).
With --extra, also what tools do to a lower directory of 2,000 files: unpack it from a
tarball, `cp -a`, `mv`, `chmod -R`, and `sed -i` of every file (a write aside and a rename
over each); and a package install, `python -m venv` (ensurepip installs pip, offline).

    sudo .venv/bin/python -m bench                  # the full run (10-20 minutes)
    sudo .venv/bin/python -m bench --extra          # also the --extra workloads
    .venv/bin/python -m bench --quick               # a subset, under a minute
    .venv/bin/python -m bench --json out.json       # also write the results as JSON
    .venv/bin/python -m bench --markdown out.md     # also write the tables as Markdown
    .venv/bin/python -m bench --profile prof/ --only read-small-warm
        # also run the gitsess daemon under cProfile for one extra run of each workload

The goal column also gives, for each goal, in how many runs gitsess was within it of the target
measured right beside it in the same run, and calls the row a tie when a sign test cannot tell
that from a coin toss: such a row's median lands either side of the goal from run to run.

Ratios vary with the machine and its load: read them, never assert them in tests.
"""
