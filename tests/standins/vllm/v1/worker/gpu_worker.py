"""Stand-in for vllm 0.24.0 v1/worker/gpu_worker.py: Worker.execute_model(self, scheduler_output)."""


class Worker:
    def execute_model(self, scheduler_output):
        return scheduler_output.total_num_scheduled_tokens
