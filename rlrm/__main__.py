"""`python -m rlrm` is the same as the `rlrm` command."""

from rlrm.cli.main import main

main()
