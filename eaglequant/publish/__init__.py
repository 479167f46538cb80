"""What a verified head carries out: its model card, and the upload that the verification vouches for."""
