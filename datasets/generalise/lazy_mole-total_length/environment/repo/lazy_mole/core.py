def total_length(f):
    return sum(1 for item in f)
