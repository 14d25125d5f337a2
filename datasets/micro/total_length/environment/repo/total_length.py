def total_length(words):
    return sum(1 for w in words)
