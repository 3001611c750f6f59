"""Inputs: deploy configs (vllm-omni YAML) and request files."""
