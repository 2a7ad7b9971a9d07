"""Deployment decisions' writes, below the pages: the review pages propose, edit, approve and
reject them, and the worker's lifecycle flags the final ones a newer experiment contradicts."""
