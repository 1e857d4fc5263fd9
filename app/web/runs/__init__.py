"""Running people's code and the scenarios: the lanes, the queue seam and both its
implementations, the run book, gates, drawings, the first look, and the shared line's upload host
process (`autograd-lab upload-host`). Nothing here imports FastAPI."""
