"""Stand-in for vllm.distributed.parallel_state: the rank and size the stand-in process claims."""

import os


def get_tensor_model_parallel_rank() -> int:
    return int(os.environ.get("STANDIN_TP_RANK", "0"))


def get_tensor_model_parallel_world_size() -> int:
    return int(os.environ.get("STANDIN_TP_SIZE", "1"))
