"""The draft head as a computation: a reference forward pass and calibration of activation scales."""
