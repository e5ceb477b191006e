"""What a Slurm node runs for the portal outside its jobs: the Prolog that pulls a job's image
into the node's cache and the Epilog that lets go of it (`prolog`), and the puller the Prolog
runs as the cache's account (`puller`). Standard library only, no Django: a compute node has
the project's code, not the portal's environment (docs/containers.md, "Slurm notes")."""
