"""The admin page's data (GET /admin, /api/admin: routers/admin.py): what the token's holder
sees of the whole server. overview.py gathers the open classes, the workers and the line;
people.py the recent runs, grouped by whose they are. Everything here only reads: the actions
(end a class, remove a member, stop a run) are the classroom's and the upload service's own."""
