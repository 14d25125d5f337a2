def index_of(c, cur):
    for m, count in enumerate(c):
        if count == cur:
            return m
    return 0
