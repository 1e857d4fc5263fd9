# autograd-lab in a container: the same install the Makefile does, without the venv.
FROM python:3.11-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends graphviz \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /srv/autograd-lab
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
RUN PIP_EXTRA_INDEX_URL="$PIP_EXTRA_INDEX_URL" pip install --no-cache-dir -c constraints.txt ".$EXTRAS"

ENV AUTOGRAD_LAB_HOST=0.0.0.0
EXPOSE 8000
CMD ["autograd-lab", "serve", "--host", "0.0.0.0", "--port", "8000"]
