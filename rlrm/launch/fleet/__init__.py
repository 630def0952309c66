"""The supervisor of the processes a run owns: server replicas of every backend and the SGLang router.

server_fleet.py is the one entry (`ServerFleet`: start, supervise, stop); pool.py owns local replicas,
ray_replicas.py replicas placed on Ray nodes; process.py starts one process from an argv list in its own
process group and stops it by pid; backends.py holds one object per backend (embedded, vLLM, SGLang) with its
command line, environment, readiness probe and capabilities (engine_argv.py: the same by name, for
`rlrm launch server`); router.py runs the SGLang router; health.py checks servers a run was given rather than
started.
"""
