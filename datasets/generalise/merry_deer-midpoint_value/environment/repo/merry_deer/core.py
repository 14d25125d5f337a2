def midpoint_value(lst, e):
    return (lst - e) / 2
