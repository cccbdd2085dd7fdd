"""The one thing pyproject.toml cannot say: the optional compiled Avro row writer.

``snowsource/core/_avro_rows_c.c`` is built where a C compiler and Python's headers are present
(``make install``); where they are not (the container image's slim build stage), the build goes
on without it and ``snowsource.core.avro_rows`` uses its generated Python code, which writes the
same bytes."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "snowsource.core._avro_rows_c",
            ["snowsource/core/_avro_rows_c.c"],
            optional=True,
        )
    ]
)
