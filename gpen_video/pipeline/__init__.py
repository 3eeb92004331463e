"""Jobs through the stages: one job's decode, track and encode threads, the engine that keeps the
workers from job to job, and batches of inputs."""
