"""The HTTP shell: the guards, middleware and static assets, slow clients, who a request is
from, and how errors and documents are answered."""
