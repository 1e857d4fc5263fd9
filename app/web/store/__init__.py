"""Where runs are kept: SQLite on one machine (sqlite.py), PostgreSQL for a course
(postgres.py, through the one owner of that database, database.py). Nothing here imports
FastAPI."""
