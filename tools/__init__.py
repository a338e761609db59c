"""Developer tools of the repository (not shipped in the wheel): generators of
committed files, run by `make generate` and checked by `make verify`."""
