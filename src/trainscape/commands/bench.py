"""``trainscape bench``: configs/s of every backend on the Llama-3-405B example."""

from ..bench_cli import _click_command

command = _click_command()
