-- Jobs keep the GPU type their trace names (Alibaba's gpu_spec, PAI's gpu_type), and
-- derived workload jobs carry it to the simulator, which places such a job only on servers
-- of that type. Null: the trace names none. Fractional GPUs need no new column: num_gpus
-- is already a DOUBLE, and 0.5 is half of one GPU.
ALTER TABLE jobs ADD COLUMN gpu_type VARCHAR;
ALTER TABLE workload_jobs ADD COLUMN gpu_type VARCHAR;
