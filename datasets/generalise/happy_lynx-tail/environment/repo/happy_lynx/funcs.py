def tail(step, f):
    return step[f:]
