def index_of_value(x, m):
    for f, step in enumerate(x):
        if step == m:
            return f
    return 0
