# autograd-lab in a container, in two stages: a builder that installs everything into a virtual
# environment (pip, its caches and the wheel built from this checkout stay there), and a slim
# runtime that holds that environment, graphviz, and nothing of the build.

# both stages on the same image: the environment's python is a link to the base's interpreter
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /build
COPY pyproject.toml constraints.txt README.md ./
COPY app ./app
COPY autograd_lab ./autograd_lab
COPY templates ./templates
COPY static ./static
COPY scenarios ./scenarios
# constraints.txt pins torch's version; to get its CPU build rather than a CUDA one, pass your
# CPU wheel index at build time: docker build --build-arg PIP_EXTRA_INDEX_URL=... .
ARG PIP_EXTRA_INDEX_URL=""
# EXTRAS="[shared]" for a course on several machines (deploy/compose.yaml): psycopg, Procrastinate
ARG EXTRAS=""
# not editable: the wheel carries templates, static and scenarios (app/_data), so the runtime
# needs no checkout; pip compiles the bytecode here, since a run's own uid cannot write it
RUN PIP_EXTRA_INDEX_URL="$PIP_EXTRA_INDEX_URL" pip install --no-cache-dir -c constraints.txt ".$EXTRAS"

FROM ${PYTHON_IMAGE} AS runtime
# graphviz draws the graphs; util-linux (unshare) is already in the base image
RUN apt-get update \
    && apt-get install -y --no-install-recommends graphviz \
    && rm -rf /var/lib/apt/lists/*
COPY --from=builder /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /srv/autograd-lab

ENV AUTOGRAD_LAB_HOST=0.0.0.0
EXPOSE 8000
CMD ["autograd-lab", "serve", "--host", "0.0.0.0", "--port", "8000"]
