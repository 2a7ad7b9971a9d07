"""Uploaded prompt sets: storing a version, the upload form and the pages."""
