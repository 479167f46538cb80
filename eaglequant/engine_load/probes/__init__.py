"""Probes that load checkpoints with a serving engine's own code, run in the engine's interpreter.

Run as a package (``python -m <package>.vllm_probe JOBS.json``); the modules import each other relatively and
import the engine, torch and safetensors, never eaglequant. ``eaglequant.engine_load`` launches them.
"""
