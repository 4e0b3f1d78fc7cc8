"""The files users already have: Accelerate configs, LLaMA-Factory and axolotl training YAMLs (`--from FILE`).

Each kind is a pydantic model of the keys zeroplan uses (others ignored: they are the tool's own) and a pure
function from the parsed mapping to a `FrameworkRun`: the keys taken, each with the option it sets, and the
DeepSpeed config the file names. What a file asks for that zeroplan does not model is a `SpecError` naming
the key and its value. `frameworks/source.py` reads the file (through zeroplan.readers) and recognises the
kind; zeroplan/scenario.py turns the run into the options a command line would give. docs/inputs.md.
"""
