"""Runs trained elsewhere, brought beside rlrun's: `rlrun import sb3 PATH` reads Stable-Baselines3 /
RL Zoo log folders (`rlrun.imports.zoo`) into foreign runs (`rlrun.imports.foreign`), which `ls`,
`show`, `plot` and `compare` read like rlrun's and the commands that need a snapshot refuse.
Standard library, numpy and PyYAML only: no torch, and gymnasium only to check an env id. Nothing
is imported here, so the commands that only ask `refuse_foreign` do not load numpy."""
