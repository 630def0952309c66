"""`python -m rlrm.launch.server ...`: the embedded server (see app.py)."""

from rlrm.launch.server.app import main

main()
