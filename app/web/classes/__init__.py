"""Classes: a teacher's session, its members, questions and runs sent in, kept in one process
or in PostgreSQL. Nothing here imports FastAPI."""
