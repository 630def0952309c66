"""The supervisor of the processes a run owns: server replicas of every backend and the SGLang router.

server_fleet.py is the one entry (`ServerFleet`: start, supervise, stop); pool.py owns local replicas,
ray_replicas.py replicas placed on Ray nodes; process.py starts one process from an argv list in its own
process group and stops it by pid; engine_argv.py writes vLLM's and SGLang's command lines; router.py runs
the SGLang router; health.py checks servers a run was given rather than started.
"""
