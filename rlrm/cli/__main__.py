"""`python -m rlrm.cli` is the same as the `rlrm` command."""

from rlrm.cli.main import main

main()
