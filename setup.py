# Only here for cffi_modules; everything else is in pyproject.toml.
from setuptools import setup

setup(cffi_modules=["native/ffi/build.py:ffi"])
