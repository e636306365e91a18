"""Models leaving jaxmd_dp: serialised functions and other programs' model files."""
