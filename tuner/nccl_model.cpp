// placeholder: filled in by the tuner work (issue 9)
