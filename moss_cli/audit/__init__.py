"""`moss audit-determinism`: run the same requests in many batch compositions and explain any
difference (RNG coupling vs numeric batch variance)."""
