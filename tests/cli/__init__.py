"""Tests of the `kuiper` command (kuiperinfer/cli), one file per group of sub-commands.

They run the command in-process through tests/cli_runner.py.
"""
