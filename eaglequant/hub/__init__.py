"""The Hugging Face Hub client: repo ids to cached snapshots, listings with LFS SHA-256s, uploads; its errors as one
line.
"""
