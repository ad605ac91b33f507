"""``python -m sb3_r2po.zoo train|enjoy|plot_train|plot_from_file|all_plots ...``: the RL Zoo with R2PO registered."""

from sb3_r2po.zoo import main

if __name__ == "__main__":
    main()
