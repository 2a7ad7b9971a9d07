"""The prompts an experiment sends: built-in sets shipped as data, synthetic prompts and uploaded
files read and checked before anything is stored. Free of Django."""
