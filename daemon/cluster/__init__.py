"""Several workers as one dataflow: the worker of several, the mesh it exchanges over, and its clock.

`member.ClusterWorker` is worker ``i`` of ``W``: a `Worker` whose dataflow exchanges updates with
the other workers and whose epochs close at the same boundaries on every worker (`clock`), and
whose index comes from the host name or the config (`identity`, which also gives the workers'
mesh addresses). `mesh.MeshTransport` is the engine's transport over direct ZeroMQ connections
between the workers (`mesh_peers`: the connections, membership and what arrived from whom;
`mesh_wire`: the messages and their validating decoder);
`mesh_member.MeshWorker` is the worker of several over it, checkpointing at epochs all workers
agree on and restoring together the newest checkpoint all of them completed.

May import everything below the worker and the worker itself (`ddflow.daemon.worker`), and
`ddflow.operators`/`ddflow.config`; never `factory`, `service`, `testing` or `cli`.
"""
