"""The `moss` command line (Typer). Importing it is starting the application, so this is where
process-wide settings that must precede torch's import are made."""

from ..threads import quiet_openmp

quiet_openmp()
